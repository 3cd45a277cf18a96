"""ftgateway: an OpenAI-compatible HTTP front for one model served by tritonserver (FT backend).

    python -m ftgateway --config /etc/ftfleet/gateway/<model>.json

It speaks gRPC to the local tritonserver and runs the model repository's own steps itself:
`preprocessing` (the model's tokenizer), `fastertransformer` (with the sampling inputs the ensemble
does not carry) and `postprocessing`. The role `gateway` deploys it; docs/serving-front.md says how
clients call it.
"""
