import uuid


def test_an_ask_is_answered_and_a_send_waits_for_its_machine(collie_lead, fake_member):
    api = collie_lead.api
    laptop = fake_member("laptop")
    desk = fake_member("desk")

    # an ask raised on one member reaches the lead's API with its digest
    laptop.raise_ask("agent-1", "c1", title="Deploy to staging?")
    pane = collie_lead.wait_for(
        lambda: api.get("/api/agents/laptop/agent-1/conversations/c1").json().get("ask"))
    answer = api.post(f"/api/ask/{pane['id']}", json={
        "request_id": str(uuid.uuid4()), "machine": "laptop", "agent": "agent-1",
        "digest": pane["digest"], "answer": {"option_ids": ["yes"]}})
    assert answer.json()["outcome"] == "accepted"
    assert laptop.wait_request(op="answer").outcome == "accepted"

    # a send to a member that is offline waits in the inbox, then runs when it returns
    desk.offline()
    turn = api.get("/api/agents/desk/agent-1/conversations/c1").json()["turn"]
    request_id = str(uuid.uuid4())
    queued = api.post("/api/send", json={
        "request_id": request_id, "machine": "desk", "agent": "agent-1",
        "conversation": "c1", "text": "run the tests", "turn": turn}).json()
    assert queued["outcome"] == "queued"
    assert queued["text"].startswith("queued, machine offline since")
    assert desk.requests == []

    desk.online()
    sent = desk.wait_request(op="send")
    assert (sent.id, sent.text, sent.outcome) == (request_id, "run the tests", "sent")
    item = collie_lead.wait_for(
        lambda: (i := api.get(f"/api/inbox/{request_id}").json())["state"] == "done" and i)
    assert item["receipt"]["outcome"] == "sent"
