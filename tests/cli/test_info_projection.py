"""vitviz info on an open_clip folder names the projection's width as the embedding dim, never as classes
(issue 37: it said "classes: 128")."""

from text_builders import open_clip_cfg, open_clip_model, write_open_clip_folder

from vitviz.cli import main


def test_info_on_an_open_clip_folder_says_embedding_dim_not_classes(tmp_path, capsys):
    cfg = open_clip_cfg(False)
    folder = write_open_clip_folder(tmp_path / "clip", open_clip_model(cfg), cfg)
    assert main(["info", str(folder), "--num-heads", "2"]) == 0  # (the tiny tower: 32 wide, heads of 16)
    out = capsys.readouterr().out
    width = cfg["embed_dim"]
    assert f"embedding dim: {width} (a projection head: no classes)" in out
    assert "classes:" not in out
