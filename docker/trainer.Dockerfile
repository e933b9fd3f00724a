# Training side: a CUDA PyTorch base; the trainer streams shards and never samples.
FROM pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml constraints.txt README.md ./
COPY common ./common
COPY preprocess ./preprocess
COPY pipelines ./pipelines
COPY trainer ./trainer
# Keep the base image's CUDA torch: install the project without re-resolving torch. No Ray: the trainer never
# imports it, so the project's dependencies go in without it (read from pyproject.toml, not copied here).
RUN grep -v '^torch==' constraints.txt > /tmp/constraints-gpu.txt \
 && python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
print('\n'.join(d for d in deps if not d.startswith('ray')))" > /tmp/trainer-requirements.txt \
 && pip install -c /tmp/constraints-gpu.txt -r /tmp/trainer-requirements.txt \
 && pip install --no-deps -e . \
 && python -c "import importlib.util, torch, trainer; assert importlib.util.find_spec('ray') is None; print(torch.__version__)"
ENTRYPOINT ["torchrun"]
CMD ["--standalone", "--nproc-per-node", "gpu", "-m", "trainer", "--shards", "/data/shards", "--preset", "citeseer", "--out", "/data/runs/citeseer"]
