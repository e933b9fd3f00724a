# Preprocessing side: Ray + the CPU sampler. No CUDA: sampling never needs a GPU.
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml constraints.txt README.md ./
COPY common ./common
COPY preprocess ./preprocess
COPY pipelines ./pipelines
COPY trainer ./trainer
# The CPU wheel of torch keeps this image small; the preprocessing code never imports CUDA.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip install -c constraints.txt -e '.[cluster]'
EXPOSE 6379 8265 10001
CMD ["ray", "start", "--head", "--port=6379", "--dashboard-host=0.0.0.0", "--block"]
