"""What the multi-device experiments share: the worker that trains on one device of a run
(worker), starting its processes (launcher) and each joining its run (process_group), the
book's two code paths it runs (the from-scratch LeNet with its own allreduce,
allreduce_by_hand; ResNet-18 under DistributedDataParallel, ddp), a training run's results
(run_results) and the figures. A part never imports an experiment."""
