"""Tables, Chrome-trace (Perfetto) export and report writers."""
