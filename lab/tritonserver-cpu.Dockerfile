# The lab's serving image: Triton Inference Server on the CPU, standing in for the Triton+FT
# image where there is no GPU (the lab, the site scenario). Built by scripts/build-triton-cpu-image
# from the Debian 12 base image and the tritonserver binary of the nvidia-pytriton wheel:
#   /opt/tritonserver/bin/tritonserver            as in NGC's tritonserver images
#   /opt/tritonserver/backends/python             the Python backend (and its 3.11 stub)
#   /opt/tritonserver/backends/fastertransformer  a Python-based backend named like FT's: the
#                                                 project's CPU reference decoder, with FT's
#                                                 inputs and outputs (ftnative/triton_model.py)
# plus transformers for the tokenizing models and ftnative for the decoder, in the system
# Python the backend stub embeds. config.pbtxt files are the production ones, unchanged.
ARG BASE=ftfleet/debian12-systemd:latest
FROM ${BASE}
# The Python backend's stub links the system Python's shared library.
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libpython3.11 \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY tritonserver /opt/tritonserver
COPY site-packages /usr/local/lib/python3.11/dist-packages
# OPENBLAS_NUM_THREADS=1: the stand-in decodes with numpy, whose OpenBLAS starts a worker
# thread per core that spins (sched_yield) between calls; a tiny model's small matrices gain
# nothing from it. Measured on the lab, 200 completions (4 clients): the stand-in's processes
# took 18.5 s of CPU without it (its main threads 1.1 s), 1.3 s with it. tests/tritonlocal.py
# starts its tritonserver with the same (STAND_IN_ENV; a unit test compares the two).
ENV LD_LIBRARY_PATH=/opt/tritonserver/lib \
    PATH=/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HF_HUB_OFFLINE=1 \
    OPENBLAS_NUM_THREADS=1
WORKDIR /workspace
CMD ["tritonserver", "--help"]
