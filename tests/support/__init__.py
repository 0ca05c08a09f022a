"""What the tests share: Redis servers and topologies, child processes, the test tasks,
jobs in each state, planted data, the admin's test client, the command line."""
