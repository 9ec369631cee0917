"""Training on several devices: the book's three code paths (scratch, concise, single_process),
the worker and its launcher, the cost model, parameter servers, architectures and the summary."""
