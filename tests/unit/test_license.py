"""One license, said the same way everywhere it is declared: the text in LICENSE, the two
distributions' metadata, the image's OCI label and the chart."""

from __future__ import annotations

import re
import tomllib

import yaml

from support.paths import REPO

SPDX = "Apache-2.0"


def test_license_text_is_the_apache_license_2_0_unchanged() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text
    # The appendix's placeholder stays as published: the notice goes in source files, not here.
    assert "Copyright [yyyy] [name of copyright owner]" in text


def test_every_declaration_names_the_same_license() -> None:
    operator = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    sandbox = tomllib.loads((REPO / "sandbox" / "pyproject.toml").read_text())["project"]
    assert operator["license"] == sandbox["license"] == SPDX
    assert operator["license-files"] == ["LICENSE"]
    dockerfile = (REPO / "Dockerfile").read_text()
    label = re.search(r'org\.opencontainers\.image\.licenses="([^"]+)"', dockerfile)
    assert label is not None and label.group(1) == SPDX
    # The wheel built in the image's first stage has the text only if the build context copies it.
    assert re.search(r"^COPY [^\n]*\bLICENSE\b[^\n]* \./$", dockerfile, re.MULTILINE)
    chart = yaml.safe_load((REPO / "charts" / "specdeploy" / "Chart.yaml").read_text())
    assert chart["annotations"]["artifacthub.io/license"] == SPDX
