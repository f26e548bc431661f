"""coddl: elastic GPU-cluster scheduling for distributed deep-learning training."""
