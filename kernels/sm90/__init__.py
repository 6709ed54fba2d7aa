"""The sm90 kernel family: the native Hopper D512 forward
(``cudnn/sdpa/fwd/kernels/sm90/prefill_d512_f16.py``), one template for every
head dim (ground.families.FAMILIES["sm90"]).

- ``kernels.sm90.specialize``: Case -> the kernels' own plan
  (``SdpaFwdDslSm90.check_support``): ``config_sm90.TemplateParams`` and the
  compile arguments of the template's ``compile()``; the compile key.
- ``kernels.sm90.adapter``: ``Sm90Adapter`` (``compile_only`` for sm_90a on
  any machine; ``run`` on a Hopper GPU, not yet verified on one).

Nothing here is imported by the SM80 adapters; the SM80 family stays as it is.
"""
