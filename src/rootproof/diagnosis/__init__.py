"""The embedded default's diagnosis, stage by stage (docs/diagnosis.md): candidates from the
evidence, whatever the question said."""
