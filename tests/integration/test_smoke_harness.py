def test_each_test_gets_a_migrated_database(conn):
    count = conn.execute("select count(*) from schema_migrations").fetchone()[0]
    assert count >= 1
