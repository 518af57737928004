"""The soak benchmark: real processes, random faults and cancels, a ledger of every effect."""
