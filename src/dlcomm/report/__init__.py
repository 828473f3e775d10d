"""``dlcomm report``: the papers' tables and figures from the runs MLflow recorded."""
