# Training side: a CUDA PyTorch base; the trainer streams shards and never samples.
FROM pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml constraints.txt README.md ./
COPY common ./common
COPY preprocess ./preprocess
COPY pipelines ./pipelines
COPY trainer ./trainer
# Keep the base image's CUDA torch: install the project without re-resolving torch.
RUN grep -v '^torch==' constraints.txt > /tmp/constraints-gpu.txt \
 && pip install -c /tmp/constraints-gpu.txt -e . \
 && python -c "import torch, trainer; print(torch.__version__)"
ENTRYPOINT ["torchrun"]
CMD ["--standalone", "--nproc-per-node", "gpu", "-m", "trainer", "--shards", "/data/shards", "--preset", "citeseer", "--out", "/data/runs/citeseer"]
