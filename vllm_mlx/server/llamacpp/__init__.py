"""llama.cpp server routes editors call: /infill (fill-in-the-middle)."""
