"""One candidate as a trial: unrolled, sized, replayed, scored and stored as one file."""
