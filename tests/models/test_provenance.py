"""`provenance.json` (grpo_tools/models/provenance.py): the record a conversion writes next to a local model's weights.

Covers the round trip a converter and `grpo-tools push` rely on (what `write_provenance` writes, `read_provenance`
reads back unchanged), a folder without the file (None: the base is simply not a conversion), what
`grpo-tools train` copies into `run_info.json`, and every malformed file refused with a message naming the file and
the field at fault.
"""

import json
import logging
from dataclasses import asdict

import pytest

from grpo_tools.models.provenance import (
    PROVENANCE_FILE,
    Provenance,
    ProvenanceError,
    provenance_record,
    read_provenance,
    write_provenance,
)


def test_written_provenance_reads_back_the_same(tmp_path, smollm2_provenance):
    path = write_provenance(tmp_path, smollm2_provenance)

    assert path == tmp_path / PROVENANCE_FILE
    assert json.loads(path.read_text()) == asdict(smollm2_provenance)  # the plain JSON object other tools can read too
    assert read_provenance(tmp_path) == smollm2_provenance


def test_a_folder_without_provenance_has_none(tmp_path):
    assert read_provenance(tmp_path) is None
    assert provenance_record(str(tmp_path)) is None
    assert provenance_record("HuggingFaceTB/SmolLM2-135M-Instruct") is None  # a Hub id, not a folder here


def test_run_info_records_the_folders_provenance(tmp_path, caplog, smollm2_provenance):
    write_provenance(tmp_path, smollm2_provenance)
    assert provenance_record(str(tmp_path)) == asdict(smollm2_provenance)

    (tmp_path / PROVENANCE_FILE).write_text("{}")
    assert provenance_record(str(tmp_path)) is None  # training is over by then: a warning, and push refuses the file
    assert any(
        PROVENANCE_FILE in record.getMessage() for record in caplog.records if record.levelno == logging.WARNING
    )


MISSING = object()  # an override that removes the field


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not readable JSON"),
        ('["HuggingFaceTB/SmolLM2-135M-Instruct"]', "expected a JSON object, not list"),
        ({"weights": ""}, "field 'weights' must be a non-empty string"),
        ({"license": 2}, "field 'license' must be a non-empty string, not 2"),
        ({"base_model": "not/a/hub id"}, "field 'base_model': 'not/a/hub id' is not a Hub model id"),
        ({"converted_by": MISSING}, "missing field 'converted_by'"),
        ({"base-model": "x"}, "unknown field 'base-model'"),
    ],
)
def test_malformed_provenance_names_the_file_and_field(tmp_path, smollm2_provenance, content, message):
    if isinstance(content, dict):  # the SmolLM2 record with one field changed
        record = {**asdict(smollm2_provenance), **content}
        content = json.dumps({name: value for name, value in record.items() if value is not MISSING})
    (tmp_path / PROVENANCE_FILE).write_text(content)

    with pytest.raises(ProvenanceError) as error:
        read_provenance(tmp_path)

    assert str(error.value).startswith(f"{tmp_path / PROVENANCE_FILE}: ")
    assert message in str(error.value)


def test_a_converter_cannot_write_a_record_push_would_refuse(tmp_path, smollm2_provenance):
    with pytest.raises(ProvenanceError, match="field 'base_model'"):
        write_provenance(tmp_path, Provenance(**{**asdict(smollm2_provenance), "base_model": "outputs/a/b"}))
    assert not (tmp_path / PROVENANCE_FILE).exists()
