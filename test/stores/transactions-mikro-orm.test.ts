/** Effect and record in one mikro-orm transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, describeOrmTransactions } from '../suites/orm-transactions.suite.js';

describeOrmTransactions('mikro-orm', 'postgres', await databaseAvailable('postgres'));
describeOrmTransactions('mikro-orm', 'mysql', await databaseAvailable('mysql'));
