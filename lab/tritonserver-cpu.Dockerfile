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
ENV LD_LIBRARY_PATH=/opt/tritonserver/lib \
    PATH=/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HF_HUB_OFFLINE=1
WORKDIR /workspace
CMD ["tritonserver", "--help"]
