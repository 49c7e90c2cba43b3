# What both workflows share (workflow/Snakefile: one model's sweep; workflow/fleet.smk: a fleet of them),
# included first by each: whether this is the main invocation, how a run stops on a config mistake or a
# run with no answer, and the rules' cores, memory and placement from the job table
# (spica_lib/host/registry.py). Those read SIZES, a RuleSizes (spica_lib/host/rule_asks.py) that the
# including workflow sets once it has planned its run, before its first rule.
import sys

MAIN_INVOCATION = not (workflow.remote_exec or workflow.subprocess_exec)  # not a job's own Snakemake

if MAIN_INVOCATION:
    from spica_lib.base.lifetime import silence_when_orphaned

    silence_when_orphaned()  # its owner gone, a write to a closed pipe must not leave it stuck


def stop_for(mistake):
    """A config mistake is the user's to fix: show the problems, not a traceback (exit 2)."""
    print(mistake, file=sys.stderr)
    sys.exit(2)


def fail_for(problem):
    """A run that found no answer has failed its user, whatever the jobs did: exit 1, saying why (None: it has not)."""
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(1)


def job_threads(name):
    """A rule's `threads`: its job's cores for this run."""
    return SIZES.threads(name)


def job_mem_mb(name):
    """A rule's `mem_mb`: its job's memory for the threads it gets."""
    return lambda wildcards, threads: SIZES.mem_mb(name, threads)


def job_is_local(name):
    """A rule's `localrule`: whether its job runs on this machine (the host, its script's process, or a pilot's waiter)."""
    return SIZES.is_local(name)
