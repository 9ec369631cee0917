"""Training on several devices: the book's three code paths (scratch, concise, single_process),
the worker, the probes (what workers measure without training) and their launcher, the cost
model, parameter servers, architectures and the summary."""
