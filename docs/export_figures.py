"""Copy the README's figures out of the executed notebooks -- nothing is recomputed.

A notebook cell whose metadata holds ``"readme_figure": "NAME"`` has its (last) PNG output
written to ``docs/figures/NAME.png``, reduced to a 256-colour palette so the files stay small.
Run it after re-executing the notebooks:

    python docs/export_figures.py
"""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def export(notebooks=None, out=ROOT / "docs" / "figures") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(notebooks or (ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            name = cell.get("metadata", {}).get("readme_figure")
            if not name:
                continue
            pngs = [o["data"]["image/png"] for o in cell.get("outputs", [])
                    if "image/png" in o.get("data", {})]
            if not pngs:
                raise ValueError(f"{path.name}: the cell tagged {name!r} has no PNG output; "
                                 f"execute the notebook first")
            image = Image.open(io.BytesIO(base64.b64decode(pngs[-1]))).convert("RGB")
            target = out / f"{name}.png"
            image.quantize(colors=256).save(target, optimize=True)
            written.append(target)
            print(f"{path.relative_to(ROOT)} -> {target.relative_to(ROOT)} "
                  f"({target.stat().st_size / 1024:.0f} KiB)")
    return written


if __name__ == "__main__":
    export()
