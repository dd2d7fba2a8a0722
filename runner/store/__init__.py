"""Where a run directory goes besides runs/: `--results s3://...` (url.py parses, s3.py
uploads). May import spec, redact, errors.
"""
