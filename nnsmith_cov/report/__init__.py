"""Reports over campaigns: total / unique / pass-only tables, figures, Venn diagrams and exports."""
