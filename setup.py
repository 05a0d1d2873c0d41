"""Distribution `mindspeed-mm-fcp`: Flexible Context Parallelism for MindSpeed-MM.

`mindspeed_mm` and `mindspeed_mm/core` are namespace packages so that this tree can be laid over a
MindSpeed-MM checkout without shadowing its own modules.
"""
from setuptools import find_namespace_packages, setup

setup(
    name="mindspeed-mm-fcp",
    version="0.1.0",
    description="Flexible Context Parallelism (FCP) for MindSpeed-MM multimodal training",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_namespace_packages(include=["mindspeed_mm", "mindspeed_mm.*", "mindspeed_mm_fcp"]),
    package_data={"mindspeed_mm.core.fcp": ["cost/measured/*.jsonl"], "mindspeed_mm.core.fcp.sandbox": ["configs/*.yaml"]},
    install_requires=[
        "torch>=2.1",
        "numpy",
        "scipy",
        "pyyaml",
        "tqdm",
    ],
    extras_require={
        "megatron": ["megatron-core==0.12.1"],
        "plot": ["matplotlib"],
        "hf": ["transformers==4.57.1"],
        "test": ["pytest", "megatron-core==0.12.1", "matplotlib", "transformers==4.57.1", "pyarrow==26.0.1"],
    },
    entry_points={"console_scripts": ["fcp=mindspeed_mm.core.fcp.cli:main"]},
)
