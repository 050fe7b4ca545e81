package pgtest

import (
	"context"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestURLGivesFreshDatabases(t *testing.T) {
	ctx := context.Background()
	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		u := URL(t)
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var db string
		var tables int
		err = conn.QueryRow(ctx, `SELECT current_database(),
			(SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema'))`).Scan(&db, &tables)
		if err != nil {
			t.Fatal(err)
		}
		if seen[db] {
			t.Errorf("database %s handed out twice", db)
		}
		seen[db] = true
		if tables != 0 {
			t.Errorf("database %s has %d tables, want an empty one", db, tables)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE mine (x int)"); err != nil {
			t.Fatal(err)
		}
		if err := conn.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDatabaseName(t *testing.T) {
	valid := regexp.MustCompile(`^t_[a-z0-9_]{1,48}_[0-9a-f]{6}$`)
	for _, name := range []string{
		"TestX",
		"TestWait/returns_on_cancel",
		"TestAVeryLongTestNameThatGoesOnAndOnAndOnFarBeyondSixtyThreeBytes/sub",
		`Test"; DROP DATABASE x; --`,
	} {
		t.Run(name, func(t *testing.T) {
			got := databaseName(name)
			if !valid.MatchString(got) || len(got) > 63 {
				t.Errorf("databaseName(%q) = %q", name, got)
			}
			if databaseName(name) == got {
				t.Errorf("databaseName(%q) not unique", name)
			}
		})
	}
}
