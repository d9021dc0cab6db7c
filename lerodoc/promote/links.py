"""Files placed by hard link: the same bytes under a new name, none copied (a copy across file systems).

An output tree shares unchanged files with its input this way, so any path of an output may be another name
of an input's file: writers never write into an existing file (`files.new_file`), and a link is made
under a new name and renamed over its target, so it never writes into what had that name either.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lerodoc import access
from lerodoc.files import fresh_name
from lerodoc.formats.paths import check_links, inside


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link `src` at `dst` (a copy across file systems): the same bytes, none copied. A file already at
    `dst` is replaced by name, never written into."""
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = fresh_name(dst)
    try:
        try:   # the file a link names (a Hugging Face cache snapshot's blob), not the link: link(2) keeps links
            os.link(os.path.realpath(src), tmp)
        except OSError:
            shutil.copy2(src, tmp)     # `tmp` is a name no file has: the copy makes a new file
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def link_tree(src: Path, dst: Path, skip: set[str]) -> None:
    """Mirror `src` into `dst` by hard links (copies across file systems), leaving out `skip` paths. A link in
    `src` is followed only where `formats.paths.check_links` allows (inside the dataset, or its Hugging Face
    cache blobs); one leading elsewhere stops here, before anything is linked."""
    src = access.path(src)
    files = [(path, path.relative_to(src).as_posix()) for path in sorted(src.rglob("*"))]
    files = [(path, rel) for path, rel in files if rel not in skip and not path.is_dir()]
    check_links(src, [rel for path, rel in files if path.is_symlink()])
    for path, rel in files:
        if access.is_remote(path):   # a hub dataset's file: fetched whole, by range reads
            access.copy_file(path, inside(dst, rel, field="file"))
        else:
            link_or_copy(path, dst / rel)
