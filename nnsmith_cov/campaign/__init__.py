"""The fuzzing loop: worker processes, test cases, the run folder and its status line."""
