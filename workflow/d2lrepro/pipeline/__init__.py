"""The workflow's own logic: settings, the claims evaluator, the report, the rules' code
inputs, and the opening every script shares (job)."""
