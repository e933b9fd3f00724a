"""Recommendations: the engine (retrieve, score, keep the top k), its job over every node (single process or
Ray) and the full-ranking evaluation. `python -m pipelines.recommend` runs the job."""
