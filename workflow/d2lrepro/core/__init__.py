"""The shared layer: data, devices, models, timing, results, plots and logs."""
