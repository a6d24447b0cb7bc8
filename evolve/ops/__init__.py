"""Engineer workflow over the stores: review candidates, promote to and roll back serving, and report."""
