"""What a baseline generator reports: nnsmith's GenRecord plus the generator's name and its own steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from nnsmith_cov.gen.generator import GenRecord


@dataclass
class BaselineRecord(GenRecord):
    """`ops` holds the operators the baseline chose (what the scheduler's op arms credit);
    `steps` its other decisions (glue inserted, LEMON's mutations); `draws` rebuild the
    graph through the same generator. `insert_draws` stays 0: corpus seeds, which replay
    nnsmith's insertion draws, do not apply."""

    generator: str = "nnsmith"
    origin: str = ""  # LEMON: the seed model mutated
    steps: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return super().to_json() | {"generator": self.generator, "origin": self.origin, "steps": self.steps}
