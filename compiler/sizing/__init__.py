"""Pure sizing formulas: training and serving memory, time, and the searches over hardware and layout."""
