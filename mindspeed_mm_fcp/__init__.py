"""The import-light part of FCP: the MindSpeed feature, its options and its registration.

MindSpeed must know the FCP feature before ``import mindspeed.megatron_adaptor`` parses the command
line, and at that moment MindSpeed-MM's own package ``mindspeed_mm`` must not be imported yet (its
``__init__`` imports ``megatron.training`` and expects MindSpeed's patches to be in place). This
package therefore imports nothing of ``mindspeed_mm`` at module level; the feature's hooks import
FCP's runtime (``mindspeed_mm.core.fcp``, ``mindspeed_mm.features_manager.fcp``) only when MindSpeed
calls them after its adaptor has run.

The one line an entry script such as ``pretrain_transformers.py`` needs, before
``import mindspeed.megatron_adaptor``::

    import mindspeed_mm_fcp.register  # noqa: F401  (FCP: adds fcp_cp_algo to MindSpeed's features)
"""
