"""Where an output lands: staged beside its target under a fresh exclusive name, checked, locked and swapped in
(staging, locks, links), what an output keeps of its input (kept) and whether lerobot 0.6.1 loads it (load)."""
