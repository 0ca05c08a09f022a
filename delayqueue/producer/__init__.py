"""The producer side: what application code calls to schedule, cancel and move jobs.

``@delayed_task`` (decorator), ``enqueue`` / ``spec`` / ``delay_many`` / ``cancel`` /
``reschedule`` (api) and their ``a*`` twins (async_api) check their input, build a job's
spec (job_spec), turn a delay or an instant into a due time (due) and write it through the
engine (writes). Re-exported from ``delayqueue`` itself."""
