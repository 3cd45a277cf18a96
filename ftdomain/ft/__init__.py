"""FasterTransformer's facts, from its sources (NVIDIA/FasterTransformer, the Triton backend,
void-main's forks): runs on the controller and on the hosts (Python 3.8, standard library)."""
