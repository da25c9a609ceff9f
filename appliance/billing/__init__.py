"""Usage ledger, prices, invoices, payouts, worker scores, the monthly jobs and Stripe."""
