"""The sm90 kernel family: the native Hopper D512 forward
(``cudnn/sdpa/fwd/kernels/sm90/prefill_d512_f16.py``), one template for every
head dim (ground.families.FAMILIES["sm90"]).

- ``kernels.sm90.specialize``: Case -> the kernels' own plan
  (``SdpaFwdDslSm90.check_support``): ``config_sm90.TemplateParams`` and the
  compile arguments of the template's ``compile()``; the compile key.
- ``kernels.sm90.adapter``: ``Sm90Adapter``, the compile entry
  (``compile_only`` for sm_90a on any machine; ``run`` dense and THD on a
  Hopper GPU); ``kernels.sm90.thd``: its THD
  launch arguments.
- ``kernels.sm90.wrapper``: ``Sm90WrapperAdapter``, the public wrapper
  ``sdpa_fwd_wrapper_dsl_sm90`` (dense; ``compile_only`` through the
  wrapper's own plan request; ``run`` on a Hopper GPU).

Nothing here is imported by the SM80 adapters; the SM80 family stays as it is.
"""
