"""Tests for `grpo_tools.models.loading`: `load_tokenizer`'s and `check_model_folder`'s one message for a model that
is neither a model folder here nor on the Hub."""

import re
import shutil

import pytest

from grpo_tools.models.loading import check_model_folder, load_tokenizer


def test_load_tokenizer_loads_a_folders_tokenizer(tiny_model_dir):
    assert load_tokenizer(tiny_model_dir).chat_template


@pytest.mark.parametrize("relative", ["no-model", "two/levels/deep"])
def test_a_missing_folder_is_named_and_the_hub_left_out(tmp_path, relative):
    name = str(tmp_path / relative)  # absolute: no Hub id looks like it
    with pytest.raises(OSError, match="^" + re.escape(name) + ": no such folder$"):
        load_tokenizer(name)


def test_a_name_shaped_like_a_hub_id_says_the_hub_could_not_give_it_either(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `outputs/smollm2-135m` is not here, as before `make train` converts it
    with pytest.raises(OSError) as error:
        load_tokenizer("outputs/smollm2-135m")  # HF_HUB_OFFLINE=1 (conftest): the Hub is not asked
    assert str(error.value).startswith(
        "outputs/smollm2-135m: no such folder, and the Hugging Face Hub could not give it"
    )
    assert "\n" not in str(error.value)


def test_a_folder_or_file_that_holds_no_tokenizer_is_refused_by_name(tmp_path):
    with pytest.raises(OSError, match=r": not a model folder \(no tokenizer_config.json or tokenizer.json in it\)$"):
        load_tokenizer(str(tmp_path))  # transformers itself raises a ValueError about slow tokenizers here
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(OSError, match=r"model.gguf: a file, not a model folder$"):
        load_tokenizer(str(tmp_path / "model.gguf"))


def test_a_folder_with_a_tokenizer_but_no_model_is_refused_by_name(tiny_model_dir, tmp_path):
    check_model_folder(tiny_model_dir)  # a model folder passes
    check_model_folder("owner/model")  # no folder here: maybe a Hub id, left to load_tokenizer
    folder = tmp_path / "tokenizer-only"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "config.json").unlink()
    assert load_tokenizer(str(folder)).chat_template  # enough for `python -m tasks.bfcl --tokenizer`
    with pytest.raises(OSError, match=r"tokenizer-only: not a model folder \(no config.json in it\)$"):
        check_model_folder(str(folder))  # transformers raises a ValueError about model_type here
    with pytest.raises(OSError, match=r"tokenizer.json: a file, not a model folder$"):
        check_model_folder(str(folder / "tokenizer.json"))
