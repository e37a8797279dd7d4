"""What a path is, classified once (locate), and a run or a job as every analyser sees it."""
