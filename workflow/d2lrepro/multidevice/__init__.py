"""Training on several devices. The experiments, each with its summary: data-parallel training
(data_parallel, over the worker, the book's scratch and concise code paths and the launcher),
the book's one-process code (single_process), the cost model with the printed examples
(cost_model), parameter servers and architectures; the metrics of a training run they share
(runs) and their figures."""
