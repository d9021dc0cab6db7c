"""bench/peers' scoring: one rule for every tool, lerodoc included (new against the clean run, on subject)."""

from bench.peers import Run, judge_lerodoc, judge_peer, lerodoc_subjects, zoo_verdict
from lerodoc.ops.validate import catalogue


def lerodoc_run(*findings: tuple[str, str, str]) -> Run:
    return Run(1 if any(s == "error" for _, s, _ in findings) else 0, 0.1,
               {"findings": [{"code": c, "severity": s, "message": m} for c, s, m in findings]})


CLEAN = lerodoc_run(("STA021", "warning", "dataset stats of action lack q01 and q99"))


def test_every_catalogue_code_has_a_subject():
    assert not [row["code"] for row in catalogue() if not lerodoc_subjects(row["code"])]


def test_a_new_finding_on_the_subject_catches_the_defect():
    run = lerodoc_run(("STA021", "warning", "dataset stats of action lack q01 and q99"),
                      ("TS001", "error", "episode 1 starts at 0.5 s"))
    verdict = judge_lerodoc(run, CLEAN, {"timestamps"}, {"TS001"})
    assert verdict.outcome == "yes" and "expected TS001: all reported" in verdict.evidence


def test_findings_the_clean_run_has_or_off_subject_do_not_count():
    same_with_other_digits = lerodoc_run(("STA021", "warning", "dataset stats of action lack q01 and q98"))
    assert judge_peer("lerodoc", same_with_other_digits, CLEAN, {"stats"}, set()).outcome == "no"
    off_subject = lerodoc_run(("TSK004", "warning", "task_index 1 has the empty text ''"))
    verdict = judge_lerodoc(off_subject, CLEAN, {"timestamps"}, {"TS001"})
    assert verdict.outcome == "other" and "expected TS001: missing TS001" in verdict.evidence


def test_zoo_verdict_fails_on_errors_only():
    assert zoo_verdict("lerodoc", CLEAN)["outcome"] == "passes"
    assert zoo_verdict("lerodoc", lerodoc_run(("VID005", "error", "1/1000 s grid")))["outcome"] == "fails"
    robovet = Run(1, 0.1, {"results": [{"check_id": "VIDEO-401", "severity": "FAIL", "summary": "missing"}]})
    assert zoo_verdict("robovet", robovet)["outcome"] == "fails"
