"""The unit tests live in area folders; their shared helpers (`distributed_utils`, `attention_reference`, ...) here."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
