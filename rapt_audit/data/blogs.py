"""Blog Authorship Corpus posts with author gender and age (``blogs``), DLATK subsets.

Reads the two DLATK subsets (``msgs404u.csv`` + ``users404.csv``, 2,392 posts by 404 authors;
``msgs100u.csv`` + ``users100.csv``, 741 posts by 100 authors). They share 3 authors and 14 of their
posts; the 100-author copies of those posts were re-processed (leading spaces dropped, ``&nbsp;``
decoded), so posts are matched on author, date and whitespace-normalised text and each is kept only
once (the first copy: 14 repeats across the subsets and 2 within each file are dropped, so that
the same post cannot land in both a victim and an attacker split). Five empty posts are skipped.

Attributes are per **author**: ``gender`` (1 = female in ``users404``, spelled out in ``users100``)
and ``age`` in 6 equal-frequency bins computed over the posts (edges in ``notes["age_bin_edges"]``).
Because every post of an author shares both labels, a record-level split lets an attacker
memorise authors: the author of each post is kept out of the attributes (it is not a private
attribute to infer) but is each post's group (``Record.group``, ``blogs/<user_id>``), so a run's parts are
disjoint by author (:func:`~rapt_audit.data.base.make_splits`); it is also in ``notes["author_by_uid"]``
and in the uid (``blogs/<user_id>/<message_id>``).

Posts keep their full text (median about 1k characters, a few over 10k): truncating is the job
of whatever model consumes them. Only the outer whitespace the corpus extraction left around every
post is stripped; ``urlLink`` and ``&nbsp;`` artefacts are kept as they are.
"""

from __future__ import annotations

import csv
from pathlib import Path

from rapt_audit.api.errors import DataError
from rapt_audit.api.types import Record
from rapt_audit.data.base import DATASETS, Dataset, fingerprint_files, require_file
from rapt_audit.data.trustpilot import assign_bin, equal_frequency_bins

GENDERS = ("female", "male")
#: (messages file, users file, how the users file codes gender)
SUBSETS = (("blog_authorship/msgs404u.csv", "blog_authorship/users404.csv", {"1": "female", "0": "male"}),
           ("blog_authorship/msgs100u.csv", "blog_authorship/users100.csv", {"female": "female", "male": "male"}))


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ())[:len(columns)] != columns:
            raise DataError(f"{path}: expected columns starting with {','.join(columns)}, "
                            f"found {reader.fieldnames}")
        return list(reader)


def _post_key(user_id: str, date: str, text: str) -> tuple[str, str, str]:
    """Identity of a post across the two subsets, insensitive to their different preprocessing."""
    return user_id, date, " ".join(text.replace("&nbsp;", " ").split())


@DATASETS.register("blogs", tags=("real", "attributes", "author-level"))
def load(data_dir: Path | None) -> Dataset:
    """Blog Authorship Corpus posts (DLATK 404 + 100 author subsets) with author gender and age.

    Args:
        data_dir: Directory holding ``blog_authorship/{msgs404u,users404,msgs100u,users100}.csv``.
    """
    paths: list[Path] = []
    rows: list[tuple[str, str, str, int]] = []  # uid, text, gender, age
    authors: dict[str, str] = {}
    seen: set[tuple[str, str, str]] = set()
    duplicates = empty = 0
    for messages_name, users_name, gender_codes in SUBSETS:
        messages_path = require_file(data_dir, messages_name, dataset="blogs")
        users_path = require_file(data_dir, users_name, dataset="blogs")
        paths += [messages_path, users_path]
        users = {u["user_id"]: u for u in _read_csv(users_path, ("user_id", "gender", "age"))}
        for post in _read_csv(messages_path, ("message_id", "user_id", "created_date", "message")):
            user = users.get(post["user_id"])
            if user is None or user["gender"] not in gender_codes:
                raise DataError(f"{messages_path}: post {post['message_id']} has no valid author row "
                                f"in {users_path}")
            text = post["message"].strip()
            if not text:
                empty += 1
                continue
            key = _post_key(post["user_id"], post["created_date"], text)
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            # message_id is unique only within a subset (the subsets reuse ids), so the uid adds
            # the author, which also makes author-level splitting possible from the uid alone.
            uid = f"blogs/{post['user_id']}/{post['message_id']}"
            if uid in authors:
                raise DataError(f"{messages_path}: duplicate post id {uid}")
            authors[uid] = post["user_id"]
            rows.append((uid, text, gender_codes[user["gender"]], int(user["age"])))
    edges, labels = equal_frequency_bins([age for *_, age in rows])
    records = tuple(Record(uid=uid, text=text, group=f"blogs/{authors[uid]}",
                           attributes={"gender": gender, "age": assign_bin(age, edges, labels)})
                    for uid, text, gender, age in rows)
    return Dataset(
        name="blogs",
        records=records,
        attribute_values={"gender": GENDERS, "age": tuple(labels)},
        fingerprint=fingerprint_files(paths),
        source=f"Blog Authorship Corpus, DLATK subsets msgs404u + msgs100u, from {paths[0].parent}",
        notes={"age_bin_edges": edges,
               "age_bin_rule": "bin i holds edges[i] <= age < edges[i+1], the last bin also holds the maximum; "
                               "bins are equal-frequency over posts, not authors",
               "n_authors": len(set(authors.values())), "author_by_uid": authors,
               "skipped_empty": empty, "skipped_duplicates": duplicates,
               "caveats": "gender and age are per author: runs split by author (each post's group) so the "
                          "attacker cannot memorise authors; the corpus has age "
                          "groups 13-17, 23-27 and 33-48 with gaps at 18-22 and 28-32; long posts are kept "
                          "in full (truncate in the consumer); urlLink / &nbsp; artefacts are kept"},
    )
