"""FCP's part of MindSpeed-MM's features: the runtime behind the FCP MindSpeed feature.

The feature class, its options and its registration live in the import-light package
``mindspeed_mm_fcp`` (MindSpeed must know the feature before MindSpeed-MM's own package may be
imported); ``mindspeed_mm.features_manager.fcp`` re-exports the feature.
"""
