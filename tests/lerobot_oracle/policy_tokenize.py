"""In the lerobot 0.6.1 venv: the ids transformers' AutoTokenizer gives for texts, as lerobot's tokenizer step
calls it (offline, from a folder).

    python policy_tokenize.py TOKENIZER_DIR TEXTS.json   -> prints the ids as JSON
"""

import json
import sys

from transformers import AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps(tokenizer(json.load(open(sys.argv[2])))["input_ids"]))
