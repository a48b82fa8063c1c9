"""What runs inside an exercise's sandbox, next to a submission: the zygote that forks it
(:mod:`.zygote`), the entry into the sandbox and the limits (:mod:`.confine`), the in-process
checks (:mod:`.guard`), the request server (:mod:`.server`), the wire format it shares with
the judge (:mod:`.wire`), and what stands in for what an exercise may not use (:mod:`.absent`).
Nothing here imports a hidden test, a reference or the scoring code.
"""
