"""The fleet's domain, in one importable package: what the project knows and decides, apart from
the Ansible plays that act on it.

- ftdomain.ft: FasterTransformer's facts - the model families, the weight tensors and their
  tensor-parallel split, the shard layout, a model's FT parameters and the kernels' constraints,
  the interface the backend serves, the tools' command lines, CUDA and GPU architectures. It also
  runs on the hosts (the converter's zip, the serving images' Python models): Python 3.8 and the
  standard library only.
- ftdomain.fleet: the fleet's decisions - the model a host serves, placement, checkpoints and
  weights, registry artifacts, the canary, the load balancers and keepalived, the gateway's keys,
  monitoring. Controller only.
- ftdomain.inputs: preflight's check of every input a host is given, one module per concern.
- ftdomain.values and ftdomain.errors: one reading of a boolean, one error class.

filter_plugins/ holds Ansible's adapters: each maps filter names to functions of this package.
"""
