package lab

import (
	"embed"
	"strings"
)

//go:embed scenarios/*.txt
var scenarioFS embed.FS

// BuiltinScenario returns the text of a scenario shipped with aluad
// (scenarios/NAME.txt), and whether there is one.
func BuiltinScenario(name string) (string, bool) {
	b, err := scenarioFS.ReadFile("scenarios/" + name + ".txt")
	return string(b), err == nil
}

// ParseScenarioText parses a scenario held in a string.
func ParseScenarioText(text string) (*Scenario, error) { return ParseScenario(strings.NewReader(text)) }
