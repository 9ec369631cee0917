"""Training on several devices. The experiments, each with its summary: data-parallel training
(data_parallel), the book's one-process code (single_process), the cost model with the printed
examples (cost_model), parameter servers and architectures. What they share lies beneath them,
in :mod:`d2lrepro.multidevice.parts`."""
