"""Preprocessing: candidates -> link-centric ShaDowKHop subgraphs -> WebDataset shards, run on Ray.

Public API:
    run(config) -> Path                 build or find OUT/<dataset>/<key>; see preprocess.job
    PreprocessConfig, SamplingConfig, CandidateConfig   (preprocess.config)
    sample_subgraphs(indptr, indices, src, dst, d, n, seed, shuffle=True)   (preprocess.sampler)
Imports are lazy so `import preprocess` stays cheap (no Ray, no numba compile).
"""

from __future__ import annotations

__all__ = ["run", "run_job", "PreprocessConfig", "SamplingConfig", "CandidateConfig", "sample_subgraphs"]


def __getattr__(name):
    if name in ("run", "run_job"):
        from preprocess import job

        return getattr(job, name)
    if name in ("PreprocessConfig", "SamplingConfig", "CandidateConfig"):
        from preprocess import config

        return getattr(config, name)
    if name == "sample_subgraphs":
        from preprocess.sampler import sample_subgraphs

        return sample_subgraphs
    raise AttributeError(f"module 'preprocess' has no attribute {name!r}")
