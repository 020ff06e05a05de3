package solana

import (
	"context"

	sol "github.com/gagliardetto/solana-go"
)

// CreateToken2022Mint creates a mint of the Token-2022 program, for the tests that check it
// is refused.
func (c *Client) CreateToken2022Mint(ctx context.Context, payer sol.PrivateKey, decimals uint8) (sol.PublicKey, error) {
	return c.createMint(ctx, payer, decimals, sol.Token2022ProgramID)
}
