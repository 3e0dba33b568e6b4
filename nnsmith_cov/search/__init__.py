"""Values for a graph's inputs and weights: sampling now, gradient search next."""
