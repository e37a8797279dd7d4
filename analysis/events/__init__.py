"""The neutral event model every reader produces and every analyser reads: events, their columns, the phase timeline."""
