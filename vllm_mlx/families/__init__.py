"""The family vocabulary: what every layer that reads or writes model output agrees on.

The bottom of the package: it imports nothing else from vllm_mlx, and the parsers, the
constraint grammars, prompt rendering and family detection all import it.

- `formats`: `ReasoningFormat`, `ToolCallFormat`, Harmony's `Channels`: the description types;
- `catalog`: every family's formats by parser name, and the markers that detect a family;
- `dialects`: argument dialects, each with its reader, writer and grammar in one module;
- `registry`: names, aliases and detection over a table (`ParserRegistry`,
  `UnknownParserError`);
- `message`: the parsed message and its deltas; `value_types`: typing raw values by schema;
- `literal`: matching format literals against text that may still arrive;
- `lark`: writing Lark grammar text from literals (no grammar engine imported).
"""
