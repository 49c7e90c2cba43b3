"""The live rehearsal: a ranked deployment started for real with mocker workers, from the steps its deployment files are
rendered from (deploy/live_plan.py), and held against its replay (`spica rehearse`)."""
